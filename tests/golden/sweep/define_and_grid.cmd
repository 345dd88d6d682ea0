# A grid param that is also fixed with -D is refused.
sweep programs/swiglu.step -D TB=16 --grid TB=16,32
