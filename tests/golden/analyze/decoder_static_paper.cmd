analyze programs/decoder_static.step -D L=1 -D B=8 -D R=2 -D D=64 -D HQ=4 -D HKV=2 -D HEAD_DIM=32 -D TILE_P=32 -D F=64 -D TILE_F=32 -D E=4 -D TOPK=2 -D MAXN=256 --onchip-model paper
