analyze programs/moe_timemux.step
