dot programs/decoder_static.step --collapse
