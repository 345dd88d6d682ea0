"""Type and shape checking of elaborated programs (`stepc.check` is the API's door to it)."""
