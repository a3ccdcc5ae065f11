"""Audio input: reading recordings, resampling and cutting them into fixed-length clips."""
