"""What a venv holds: the bootstrap record, what is installed, the wheel's GPU archs, and lock/ (the environment lock per hardware)."""
