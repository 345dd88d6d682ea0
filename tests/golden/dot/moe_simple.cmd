dot programs/moe_simple.step
