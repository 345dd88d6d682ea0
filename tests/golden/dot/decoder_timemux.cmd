dot programs/decoder_timemux.step --collapse
