"""Device profiles (YAML), shipped as package data humming.device_profiles."""
