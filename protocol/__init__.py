"""peertrain.protocol"""
