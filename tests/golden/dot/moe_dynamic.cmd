dot programs/moe_dynamic.step --collapse
