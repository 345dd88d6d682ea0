analyze programs/swiglu.step -D TB=32 -D TI=128 --hw hdl-validation
