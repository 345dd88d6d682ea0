# Bar charts have no x axis metric to log: refused, not ignored.
plot results.jsonl --bar cycles --logx -o speedup.png
