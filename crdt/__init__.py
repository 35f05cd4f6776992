"""peertrain.crdt"""
