analyze programs/attention_coarse.step -D B=8 -D R=2 --onchip-model artifact
