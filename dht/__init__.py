"""peertrain.dht"""
