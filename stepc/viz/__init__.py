"""Visualization: DOT diagrams of STeP graphs and their rendering with Graphviz."""
