analyze programs/attention_interleaved.step -D B=8 -D R=2 --onchip-model artifact
