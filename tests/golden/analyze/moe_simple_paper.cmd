analyze programs/moe_simple.step --onchip-model paper --format json
