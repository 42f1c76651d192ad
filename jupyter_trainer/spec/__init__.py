"""What a cell or a line asks for: the options, declared once, their checks, and the spec a backend is given."""
