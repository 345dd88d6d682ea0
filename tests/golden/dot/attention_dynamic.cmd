dot programs/attention_dynamic.step --collapse
