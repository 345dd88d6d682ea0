"""The STeP language server (`stepc lsp`). Only `server` and `features` import pygls; the
index, hover text and completion logic are plain stepc and are tested without an editor."""
