analyze programs/moe_timemux_dynamic.step -D E=4 -D R=2 -D K=2 --onchip-model artifact
