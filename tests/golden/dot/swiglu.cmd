dot programs/swiglu.step
