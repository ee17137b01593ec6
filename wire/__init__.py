"""What crosses between components, defined once: P4Info names, CPU-port headers, (later) INT layout."""
