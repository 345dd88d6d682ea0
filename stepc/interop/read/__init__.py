"""`stepc import`: a ProgramGraph file read (`reader`, within `bounds`), folded into the
units of stepc's language (`fold`, `pairs`), said one statement per operator (`operators`,
on the import's state in `writer`) and assembled and checked as a program (`to_step`,
`verify`)."""
