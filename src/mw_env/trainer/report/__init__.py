"""The run report in <run>/report/: report (summary, hyperparameters, environment; report.md and report.html),
doc (the report as blocks, rendered twice), figures (matplotlib, Agg), figure_pool (the
figures drawn in processes beside the run), card (the data card as blocks)."""
