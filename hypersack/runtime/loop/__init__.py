"""The study loop (the only while-loop), its heap and progress view, and the Executor and Store
protocols it drives."""
