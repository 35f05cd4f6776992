"""peertrain.node"""
