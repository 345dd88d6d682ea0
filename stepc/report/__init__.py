"""Every text report stepc prints, drawn on a rich Console: the analysis and its roofline,
a simulation, the types listing, the FIFO table, tuning, the reproduction. Renderers read
results; they compute nothing a JSON document would not also hold."""
