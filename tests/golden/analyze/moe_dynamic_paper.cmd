analyze programs/moe_dynamic.step -D E=4 -D K=2 --onchip-model paper --format json
