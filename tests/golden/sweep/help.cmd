# The help of stepc sweep: options, an example, exit codes.
sweep --help
