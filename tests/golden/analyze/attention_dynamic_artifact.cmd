analyze programs/attention_dynamic.step -D B=8 -D R=2 --onchip-model artifact
