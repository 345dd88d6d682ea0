dot programs/attention_coarse.step --collapse
