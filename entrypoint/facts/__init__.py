"""The data the decisions read: Facts (what the edge gathered), the GPU Inventory, dataset vocabulary,
the embedded models' catalog. Plain values; nothing here reads the world."""
