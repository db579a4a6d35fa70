"""Pure parsers of what system tools print. No I/O here: every function takes text."""
