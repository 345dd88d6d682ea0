# The help of stepc plot: options, examples.
plot --help
