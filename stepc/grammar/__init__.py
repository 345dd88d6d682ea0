"""The .step grammar (textX) and the parser that turns source text into an AST."""
