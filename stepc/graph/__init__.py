"""Elaboration of the AST into a networkx graph of operator instances."""
