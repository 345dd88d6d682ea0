analyze programs/swiglu.step --onchip-model artifact --all
