analyze programs/moe_simple.step --bind D_0=4 --bind D_1=6 --hw paper-eval
