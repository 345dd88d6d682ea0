analyze programs/attention_interleaved.step --trace kv_lens=tests/golden/analyze/kv_lens_b64.csv
