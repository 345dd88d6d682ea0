analyze programs/swiglu.step --onchip-model paper --format json
