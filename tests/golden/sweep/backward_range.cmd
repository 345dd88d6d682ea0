# A range that runs backwards is refused before anything runs.
sweep programs/swiglu.step --grid TI=256..16
