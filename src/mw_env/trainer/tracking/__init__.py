"""Experiment tracking: TensorBoard and MLflow, and the values they are fed (the MLflow model stays trainer/mlflow_model.py: its dotted name is written into every logged MLmodel)."""
