# The help of stepc reproduce lists the figures.
reproduce --help
