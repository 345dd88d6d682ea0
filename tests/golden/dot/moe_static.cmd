dot programs/moe_static.step --collapse
