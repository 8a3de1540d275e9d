"""ONNX export (onnx_export.py), its verification, the serving bundle and its runtime helper."""
