analyze programs/moe_static.step -D E=4 -D K=2 --onchip-model artifact
