analyze programs/moe_static.step --hw paper-eval
