dot programs/decoder_dynamic.step --collapse
