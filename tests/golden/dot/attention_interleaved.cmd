dot programs/attention_interleaved.step --collapse
