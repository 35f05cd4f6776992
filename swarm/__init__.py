"""peertrain.swarm"""
