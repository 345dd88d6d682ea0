"""`stepc export`: a checked program written as a ProgramGraph (`export`), each operator by
the handler its family's table names (`operators`, `kv_cache`), on the shared state of the
export (`state`); the data sources stream (`sources`), integer counts the format cannot
compute (`counts`), channel depths (`channels`) and the newer schema's stream shapes
(`stream_shapes`) in their own modules."""
