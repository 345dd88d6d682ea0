dot programs/moe_timemux.step -D E=4 -D R=2 -D K=2 --collapse
