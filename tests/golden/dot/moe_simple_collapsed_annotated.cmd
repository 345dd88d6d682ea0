dot programs/moe_simple.step --collapse --annotate analysis --bind D_0=4 --bind D_1=6
