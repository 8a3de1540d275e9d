"""One module per CLI command: parse options, call one library function, render its result."""
