analyze programs/moe_simple.step --onchip-model artifact --all
