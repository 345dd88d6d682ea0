"""Type and shape checking of elaborated programs."""
